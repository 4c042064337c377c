/* The shortest complete tapegrad training loop: the program at the top of
 * include/tapegrad.h, kept identical to it (SGD on MultiHeadAttention,
 * MSE against zeros, one step tape reset per step). */
#include <stdio.h>
#include <tapegrad.h>

int main(void)
{
    tg_tape *model = tg_tape_new(), *step = tg_tape_new();
    tg_manual_seed(123);
    tg_module *mha = tg_mha_new_config(model, (tg_attention_config){
        .d_in = 8, .d_out = 8, .context_length = 16, .num_heads = 2});
    tg_sgd *opt = tg_sgd_new(model, mha, (tg_sgd_options){.lr = 0.1, .momentum = 0.9});
    int64_t shape[3] = {4, 16, 8};
    for (int it = 0; it < 100; it++) {
        tg_tensor *x = tg_rand(step, TG_F32, 3, shape, NULL);
        tg_tensor *y = tg_module_forward(step, mha, x);
        tg_tensor *loss = tg_mse_loss(step, y, tg_zeros_like(step, y), TG_REDUCE_MEAN);
        if (!loss) { fprintf(stderr, "%s\n", tg_last_error()); return 1; }
        tg_sgd_zero_grad(opt);
        tg_backward(loss, NULL, false);
        tg_sgd_step(opt);
        tg_tape_reset(step); // drops every activation: no malloc next step
    }
    tg_tape_free(step);
    tg_tape_free(model); // the module, its parameters and the optimizer
    return 0;
}
